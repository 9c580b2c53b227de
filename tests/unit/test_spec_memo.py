"""A standby decodes the specs it reads ahead by their text less the name (ADR 0063): each is
the spec ``spec_from_dict`` makes of the whole text, whatever the name holds."""

from __future__ import annotations

import json

from gpufleet.model.job import JobSpec
from gpufleet.server.store.bodies import Specs
from gpufleet.server.store.codec import spec_from_dict, spec_to_dict


def _text(spec: JobSpec) -> str:
    return json.dumps(spec_to_dict(spec))  # as SQLAlchemy's JSON type stores it


def test_specs_alike_but_the_name_decode_once_and_each_as_a_whole_decode() -> None:
    specs = Specs()
    names = ["a-1", "a-2", 'quo"te', "back\\slash", "uni-ç", "a-1"]
    texts = [_text(JobSpec(n, "alice", gpus_per_worker=1, command=("/bin/true",))) for n in names]
    got = [specs.decode(t) for t in texts]
    assert got == [spec_from_dict(json.loads(t)) for t in texts]
    assert [g.name for g in got] == names
    assert len(specs._by_rest) == 1


def test_another_name_key_or_another_shape_is_decoded_whole() -> None:
    specs = Specs()
    other = _text(JobSpec("x", "alice", command=("name",)))  # '"name"' past the name
    reordered = json.dumps(dict(reversed(list(spec_to_dict(JobSpec("y", "bob")).items()))))
    for t in (other, other.replace('"x"', '"z"'), reordered):
        assert specs.decode(t) == spec_from_dict(json.loads(t))
    assert not specs._by_rest


def test_past_its_bound_it_keeps_no_more() -> None:
    specs = Specs(most=2)
    texts = [_text(JobSpec("j", u)) for u in ("a", "b", "c", "c")]
    assert [specs.decode(t).user for t in texts] == ["a", "b", "c", "c"]
    assert len(specs._by_rest) == 2
