"""The values of sbatch's options, read with Slurm's own rules (``src/common/parse_time.c``,
``proc_args.c``, ``slurm_opt.c``): what sbatch accepts is accepted, what it refuses raises
ValueError with sbatch's reason. With them, the one place for the values of gpufleet's own
flags (``gpufleet submit --time/--mem/--dependency``), which read the same formats more
leniently (a fractional size, a gpufleet job id) and only what gpufleet supports."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from gpufleet.model.hostlist import expand
from gpufleet.model.limits import SIGNALS

UNLIMITED: Literal["UNLIMITED"] = "UNLIMITED"
TimeLimit = int | Literal["UNLIMITED"]  # minutes, as Slurm keeps them

_C_SPACE = " \t\n\v\f\r"
TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
SIZE_FORMS = "a whole number of MB, or one with K, M, G or T (16G)"


def _strtol(text: str) -> tuple[int | None, str]:
    """C's strtol: leading blanks, a sign, digits; (None, text) when there are no digits."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    if not m:
        return None, text
    return int(m[1]), text[m.end() :]


# ----- time --------------------------------------------------------------------------------


def _valid_timespec(s: str) -> bool:
    """Slurm's _is_valid_timespec: digits, at most one '-' (before any ':'), at most two ':'."""
    digit = dash = colon = 0
    in_digits = False
    for ch in s:
        if "0" <= ch <= "9":
            if not in_digits:
                digit += 1
                in_digits = True
        elif ch == "-":
            in_digits = False
            dash += 1
            if colon:
                return False
        elif ch == ":":
            in_digits = False
            colon += 1
        else:
            return False
    if not digit or dash > 1 or colon > 2:
        return False
    need = {1: 3, 2: 4} if dash else {1: 2, 2: 3}
    return digit >= need.get(colon, 0)


def _scan_ints(s: str, seps: str) -> list[int]:
    """sscanf("%d<sep>%d..."): the numbers read before the first mismatch."""
    out: list[int] = []
    pos = 0
    for k in range(len(seps) + 1):
        m = re.match(r"[ \t]*([+-]?[0-9]+)", s[pos:])
        if not m:
            break
        out.append(int(m[1]))
        pos += m.end()
        if k == len(seps) or not s[pos:].startswith(seps[k]):
            break
        pos += 1
    return out


def time_seconds(text: str) -> int | Literal["UNLIMITED"]:
    """Slurm's time_str2secs: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; -1,
    INFINITE and UNLIMITED are no limit. ValueError when sbatch refuses the text."""
    if text.lower() in ("-1", "infinite", "unlimited"):
        return UNLIMITED
    if not text or not _valid_timespec(text):
        raise ValueError(f"Invalid time specification {text!r}: expected {TIME_FORMS}")
    if "-" in text:
        d, h, m, s = ([*_scan_ints(text, "-::"), 0, 0, 0, 0])[:4]
        total = d * 86400 + h * 3600 + m * 60 + s
    else:
        v = _scan_ints(text, "::")
        if len(v) == 3:
            total = v[0] * 3600 + v[1] * 60 + v[2]
        else:
            v = [*v, 0, 0]
            total = v[0] * 60 + v[1]
    if total < 0:
        raise ValueError(f"Invalid time specification {text!r}: negative")
    return total


def time_minutes(text: str) -> TimeLimit:
    """A --time or --time-min value in minutes as sbatch keeps it: seconds round up, and 0 is
    no limit (UNLIMITED)."""
    secs = time_seconds(text)
    if secs == UNLIMITED:
        return UNLIMITED
    mins = (secs + 59) // 60
    return mins if mins else UNLIMITED


def format_minutes(limit: TimeLimit) -> str:
    """Slurm's mins2time_str: [D-]HH:MM:SS, or UNLIMITED."""
    if limit == UNLIMITED:
        return UNLIMITED
    d, rest = divmod(limit, 1440)
    h, m = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:00" if d else f"{h:02d}:{m:02d}:00"


# ----- counts and sizes --------------------------------------------------------------------


def parse_int(text: str, *, positive: bool = True) -> int:
    """Slurm's parse_int: a whole number, > 0 when ``positive`` (else >= 0)."""
    n, rest = _strtol(text)
    if n is None or rest or n < 0 or (positive and n == 0):
        raise ValueError(f"Invalid numeric value {text!r}")
    if n > 2**31 - 1:
        raise ValueError(f"Numeric argument ({n}) too big")
    return n


def mbytes(text: str) -> int:
    """Slurm's str_to_mbytes: MB from a whole number with an optional K, M, G or T (then an
    optional B); a bare number is MB. ``1.5G`` and ``16GiB`` are refused, as sbatch does."""
    n, rest = _strtol(text)
    if n is None or n < 0:
        raise ValueError(f"Invalid memory specification {text!r}")
    if not rest:
        return n
    unit, tail = rest[0].upper(), rest[1:]
    if unit not in "KMGT" or tail not in ("", "B", "b"):
        raise ValueError(f"Invalid memory specification {text!r}: a whole number with K, M, G or T")
    if unit == "K":
        return (n + 1023) // 1024
    return n * {"M": 1, "G": 1024, "T": 1024 * 1024}[unit]


INT_MAX = 2**31 - 1


def _node_num(text: str) -> int:
    n, rest = _strtol(text)
    if n is None:  # _str_to_nodes: no digits is 0, all of the text left over (-N k is refused,
        n = 0  # as Slurm 22.05 does), and only a non-blank rest is refused
    else:
        if rest[:1] in ("k", "K"):
            n, rest = n * 1024, rest[1:]
        if rest[:1] in ("m", "M"):
            n, rest = n * 1024 * 1024, rest[1:]
    # Slurm keeps a count in a C int: past 2^31 - 1 it is negative, and refused (a count that
    # wraps to 0 or a positive int, 2^32, is taken there as that, which nobody means)
    if rest.strip(_C_SPACE) or n > INT_MAX:
        raise ValueError(f"{text!r} is not a valid node count")
    return n


def node_count(text: str) -> tuple[int, int]:
    """(min, max) from --nodes: N, MIN-MAX, or a list of sizes (1,2,4 or 2-8:2); max 0 means
    no maximum."""
    if "," in text or ":" in text:
        sizes: list[int] = []
        for part in text.split(","):
            rng, _, step = part.partition(":")
            lo_s, dash, hi_s = rng.partition("-")
            lo = _node_num(lo_s)
            hi = _node_num(hi_s) if dash else lo
            st = parse_int(step) if step else 1
            if hi < lo:
                raise ValueError(f"{part!r} is not a valid node count")
            sizes.extend(range(lo, hi + 1, st))
        if not sizes:
            raise ValueError(f"{text!r} is not a valid node count")
        return min(sizes), max(sizes)
    if "-" in text:
        lo_s, _, hi_s = text.partition("-")
        lo = _node_num(lo_s) if lo_s.strip() else -1
        lo = max(lo, 1) if lo < 0 else lo
        hi = _node_num(hi_s)
    else:
        lo = hi = _node_num(text)
        if lo < 0:
            raise ValueError(f"{text!r} is not a valid node count")
    if hi != 0 and hi < lo:
        raise ValueError(f"Maximum node count {hi} is less than minimum node count {lo}")
    return lo, hi


# ----- GPUs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpus:
    """GPUs of one type (None: any type), as the site names it."""

    type: str | None
    count: int


def gpu_list(text: str) -> tuple[Gpus, ...]:
    """--gpus, --gpus-per-node, --gpus-per-task, --gpus-per-socket: ``[type:]count[,…]``."""
    out: list[Gpus] = []
    for item in text.split(","):
        typ, _, count = item.strip().rpartition(":")
        if not typ and re.fullmatch(r"[A-Za-z][\w.-]*", count):
            typ, count = count, "1"  # a type alone is one GPU, as --gres=gpu:TYPE is
        if not re.fullmatch(r"[0-9]+", count.strip()):
            raise ValueError(f"Invalid GPU specification {text!r}: expected [type:]count")
        out.append(Gpus(typ or None, int(count)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Gres:
    name: str  # gpu, shard, nvme, …
    type: str | None
    count: int


def gres_list(text: str) -> tuple[Gres, ...]:
    """--gres: ``name[:type][:count][,…]`` (count 1 when left out), or ``none``."""
    if text.lower() == "none":
        return ()
    out: list[Gres] = []
    for item in text.split(","):
        item = item.strip().removeprefix("gres/")
        fields = item.split(":")
        name = fields.pop(0)
        if not re.fullmatch(r"[\w.-]+", name):
            raise ValueError(f"Invalid generic resource (gres) specification {text!r}")
        count = 1
        if fields and re.fullmatch(r"[0-9]+[kKmMgG]?", fields[-1]):
            c = fields.pop()
            mult = {"k": 1024, "m": 1024**2, "g": 1024**3}.get(c[-1].lower(), 1)
            count = int(c.rstrip("kKmMgG")) * mult
        if len(fields) > 1 or (fields and not fields[0]):
            raise ValueError(f"Invalid generic resource (gres) specification {text!r}")
        out.append(Gres(name, fields[0] if fields else None, count))
    return tuple(out)


# ----- dependencies ------------------------------------------------------------------------

DEPENDENCY_TYPES = (
    "after",
    "afterany",
    "afterburstbuffer",
    "aftercorr",
    "afternotok",
    "afterok",
    "singleton",
)


@dataclass(frozen=True, slots=True)
class Dependency:
    type: str  # afterok, afterany, …, singleton
    job: str | None  # "123", "123_4"; None for singleton
    minutes: int | None = None  # after:JOB+MIN: start MIN minutes after JOB began


def dependencies(text: str) -> tuple[tuple[Dependency, ...], bool]:
    """(each dependency, any_of) from Slurm's syntax: ``type:job[:job…]`` items joined by ``,``
    (all must hold) or ``?`` (any one); ``singleton``."""
    if "," in text and "?" in text:
        raise ValueError(f"Invalid dependency {text!r}: mixes ',' and '?'")
    any_of = "?" in text
    out: list[Dependency] = []
    for item in re.split(r"[,?]", text):
        kind, _, rest = item.strip().partition(":")
        kind = kind.lower()
        if kind == "singleton" and not rest:
            out.append(Dependency("singleton", None))
            continue
        if kind not in DEPENDENCY_TYPES or kind == "singleton" or not rest:
            raise ValueError(
                f"Invalid dependency {item!r}: expected TYPE:JOB[:JOB…] with TYPE one of "
                f"{', '.join(DEPENDENCY_TYPES)}"
            )
        for job in rest.split(":"):
            m = re.fullmatch(r"([0-9]+(?:_[0-9]+|_\*)?)(?:\+([0-9]+))?", job.strip())
            if not m or (m[2] and kind != "after"):
                raise ValueError(f"Invalid dependency {item!r}: bad job id {job!r}")
            out.append(Dependency(kind, m[1], int(m[2]) if m[2] else None))
    return tuple(out), any_of


# ----- the others --------------------------------------------------------------------------

_SIGNALS = SIGNALS  # Slurm's names, as the job spec reads them


@dataclass(frozen=True, slots=True)
class Signal:
    number: int
    seconds: int  # sent this long before the time limit
    batch_only: bool  # B: to the batch shell only
    reservation: bool  # R: also at the end of a reservation


def signal(text: str) -> Signal:
    """--signal=[{R|B}:]SIG[@TIME] (Slurm's get_signal_opts); TIME defaults to 60 s."""
    s = text
    resv = batch = False
    if s[:1].upper() == "R":
        resv, s = True, s[1:]
    if s[:1].upper() == "B":
        batch, s = True, s[1:]
    if s[:1].upper() == "R":
        resv, s = True, s[1:]
    s = s.removeprefix(":")
    sig, at, when = s.partition("@")
    name = sig.upper().removeprefix("SIG")
    if sig.isascii() and sig.isdigit():
        num = int(sig)
    elif name in _SIGNALS:
        num = _SIGNALS[name]
    else:
        raise ValueError(f"Invalid --signal specification {text!r}")
    if not 1 <= num <= 0xFFFF:
        raise ValueError(f"Invalid --signal specification {text!r}")
    secs = 60
    if at:
        n, rest = _strtol(when)
        if n is None or rest or not 0 <= n <= 0xFFFF:
            raise ValueError(f"Invalid --signal specification {text!r}")
        secs = n
    return Signal(num, secs, batch, resv)


MAIL_TYPES = (
    "NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
    "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS",
)  # fmt: skip


def mail_types(text: str) -> tuple[str, ...]:
    """--mail-type: Slurm ignores unknown words, but refuses a list with no known one."""
    words = [w.upper() for w in text.split(",") if w]
    if "NONE" in words:
        return ("NONE",)
    known = tuple(w for w in words if w in MAIL_TYPES)
    if not known:
        raise ValueError(f"--mail-type={text} invalid")
    return known


def exclusive(value: str | None) -> str:
    v = (value or "exclusive").lower()
    if v not in ("exclusive", "oversubscribe", "user", "mcs", "topo"):
        raise ValueError(f"Invalid --exclusive specification {value!r}")
    return v


def open_mode(text: str) -> str:
    if text[:1] in ("a", "A"):
        return "append"
    if text[:1] in ("t", "T"):
        return "truncate"
    raise ValueError(f"Invalid --open-mode specification {text!r}")


def hint(text: str) -> tuple[str, ...]:
    words = tuple(w for w in re.split(r",(?![0-9])", text))
    for w in words:
        if w.lower() not in ("compute_bound", "memory_bound", "multithread", "nomultithread"):
            raise ValueError(f'unrecognized --hint argument "{w}", see --hint=help')
    return words


def priority(text: str) -> int | str:
    if text.upper() == "TOP":
        return "TOP"
    n, _ = _strtol(text)  # strtoll: what follows the digits is ignored
    n = n or 0
    if n < 0:
        raise ValueError("Priority must be >= 0")
    if n >= 0xFFFFFFFE:
        raise ValueError("Priority must be < 4294967294")
    return n


def nice(value: str | None) -> int:
    if value is None:
        return 100
    n, _ = _strtol(value)
    n = n or 0
    if abs(n) > 2147483645:
        raise ValueError("Invalid --nice value, out of range")
    return n


def hostlist_count(text: str) -> int | None:
    """How many distinct hosts a hostlist names (``node[01-04,07],gpu5``); None for a file or
    a list that Slurm's own hostlist reader would take and this one cannot count (bounded:
    ``n[0-999999999]`` is not expanded, ``model.hostlist`` counts before it allocates)."""
    if "/" in text:
        return None
    try:
        return len(set(expand(text.replace(" ", ""))))
    except ValueError:
        return None


# ----- gpufleet's own flags ------------------------------------------------------------------


def parse_time(text: str) -> float | None:
    """Seconds from any of Slurm's time formats; None for no limit (0, UNLIMITED, INFINITE)."""
    secs = time_seconds(text.strip())
    if secs == UNLIMITED:
        return None
    return float(secs) or None  # Slurm: a limit of 0 means none


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory(text: str) -> int:
    """MiB from a memory size: a number with K, M, G or T; a bare number is MB. Unlike
    :func:`mbytes` (sbatch's), a fraction (``1.5G``) and ``GiB`` are taken."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGTkmgt])?(?:i?[Bb])?", text.strip())
    if not m:
        raise ValueError("expected a size such as 4096, 500M, 64G or 1T (a bare number is MB)")
    return math.ceil(float(m[1]) * _MEM_UNITS[(m[2] or "M").upper()])


SUPPORTED_DEPENDENCY_TYPES = ("afterok", "afterany")  # of DEPENDENCY_TYPES, what gpufleet runs


def parse_dependency(text: str) -> tuple[tuple[str, str], ...]:
    """``afterok:12:13,afterany:14`` → ((afterok, 12), (afterok, 13), (afterany, 14)): the
    kinds gpufleet supports."""
    if "?" in text:
        raise ValueError("'?' (any of) is not supported: every dependency must hold")
    out: list[tuple[str, str]] = []
    for item in text.split(","):
        kind, *ids = item.strip().split(":")
        if kind not in SUPPORTED_DEPENDENCY_TYPES:
            raise ValueError(
                f"dependency type {kind!r} is not supported "
                f"(use {' or '.join(SUPPORTED_DEPENDENCY_TYPES)})"
            )
        if not ids or not all(re.fullmatch(r"[\w.-]+", j) for j in ids):
            raise ValueError(f"{item!r}: expected {kind}:JOB[:JOB…]")
        out.extend((kind, j) for j in ids)
    return tuple(out)
