"""The array grammar (``model/arrays.py``), read the same for the API, #SBATCH and the CLI: its
size is worked out from the text, so a huge range is refused without being expanded."""

from __future__ import annotations

import pytest

from gpufleet.model.arrays import MAX_ARRAY_SIZE, parse_array
from gpufleet.model.errors import SpecError


@pytest.mark.parametrize(
    ("text", "indexes", "limit"),
    [
        ("0-3", (0, 1, 2, 3), None),
        ("1,3,5", (1, 3, 5), None),
        ("0-6:3%2", (0, 3, 6), 2),
        (" 2 , 0-1 ", (0, 1, 2), None),
        ("0-3,2-4", (0, 1, 2, 3, 4), None),
    ],
)
def test_the_forms(text: str, indexes: tuple[int, ...], limit: int | None) -> None:
    a = parse_array(text)
    assert a.indexes == indexes and a.limit == limit


def test_slurms_default_size_is_the_limit() -> None:
    assert MAX_ARRAY_SIZE == 1001
    assert len(parse_array("0-1000").indexes) == 1001
    with pytest.raises(SpecError, match="more than 1001 tasks") as e:
        parse_array("0-1001")
    assert e.value.field == "array"


@pytest.mark.parametrize("text", ["0-1000000000", "0-4000000000:1", "0-9,0-999999999999"])
def test_a_huge_range_is_refused_from_its_text(text: str) -> None:
    # expanded, these would be billions of ints (the MemoryError of the issue)
    with pytest.raises(SpecError) as e:
        parse_array(text)
    assert e.value.field == "array"


def test_the_size_is_configurable_and_counts_every_range() -> None:
    assert len(parse_array("0-9", max_size=10).indexes) == 10
    with pytest.raises(SpecError, match="more than 10 tasks"):
        parse_array("0-5,10-14", max_size=10)
    assert len(parse_array("0-100:10", max_size=11).indexes) == 11  # the step counts


@pytest.mark.parametrize(
    "text", ["", "9-0", "a-b", "0-9%0", "1,,2", "0-9:0", "%4", "0-3\x00", "1" * 11, "0-9%x"]
)
def test_bad_text_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_array(text, field="body.array", source="request")
    assert e.value.field == "body.array"
