"""Programs that try to earn a pass without computing the answers: none may.

One class per way in (lying values, shadowed builtins and modules, frame walking, secrets,
forged reports, exit tricks, patched clocks); each program gives wrong answers and tries to
be judged right anyway. Every run must end without ``passed`` and with no case passed, the
caller must survive, and nothing may be left behind. ``test_sandbox.py`` holds the
containment tests (limits, files, network, processes)."""

from __future__ import annotations

import glob
import os
import tempfile
import textwrap

import pytest

import mrgrpo.rewards.sandbox as sandbox
from mrgrpo.rewards import get_suite
from mrgrpo.rewards.sandbox import Job, Limits, Verdict, run, run_many

FAST = Limits(wall_s=8.0, cpu_s=4, memory_mb=512)

# Every dunder a test might use, lying; mixed into each plain type.
LIARS = textwrap.dedent(
    """
    class _Liar:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        def __lt__(self, other): return True
        def __le__(self, other): return True
        def __gt__(self, other): return True
        def __ge__(self, other): return True
        def __bool__(self): return True
        def __hash__(self): return 0
        def __sub__(self, other): return 0.0
        def __rsub__(self, other): return 0.0
        def __add__(self, other): return 0.0
        def __abs__(self): return 0.0
        def __len__(self): return 3
        def __contains__(self, item): return True
        def __getitem__(self, key): return self
        def __float__(self): return 0.0
        def __index__(self): return 42
        def __int__(self): return 42
        def __round__(self, n=None): return 0.13
        def __str__(self): return "hello"
        def upper(self): return "HELLO"
        __class__ = property(lambda self: float)
    class LiarObject(_Liar): pass
    class LiarFloat(_Liar, float): pass
    class LiarInt(_Liar, int): pass
    class LiarStr(_Liar, str): pass
    class LiarList(_Liar, list): pass
    class LiarTuple(_Liar, tuple): pass
    class LiarDict(_Liar, dict): pass
    """
)

NUMBER_TESTS = """
import math
def check(candidate):
    assert candidate(1) == 42
    assert abs(candidate(2) - 3.5) < 1e-6
    assert math.isclose(candidate(3), 2.25)
    assert not (candidate(4) != 7)
    assert candidate(5) > 10 and candidate(5) < 11
    assert candidate(6)
    assert round(candidate(7), 2) == 0.13
    assert int(candidate(8)) == 42
"""
STRING_TESTS = """
def check(candidate):
    assert candidate(1) == "hello"
    assert candidate(2).upper() == "HELLO"
    assert "ell" in candidate(3)
    assert len(candidate(4)) == 5
    assert sorted(candidate(5)) == sorted("hello")
"""
LIST_TESTS = """
def check(candidate):
    assert candidate(1) == [1, 2, 3]
    assert sorted(candidate(2)) == [1, 2, 3]
    assert len(candidate(3)) == 3
    assert 3 in candidate(4)
    assert candidate(5)[0] == 1
    assert tuple(candidate(6)) == (1, 2, 3)
"""
DICT_TESTS = """
def check(candidate):
    assert candidate(1) == {"a": 1}
    assert candidate(2)["a"] == 1
    assert len(candidate(3)) == 1 and "a" in candidate(3)
"""
NESTED_TESTS = """
def check(candidate):
    assert candidate(1) == [5]
    assert candidate(2) == {"a": 1}
    assert candidate(3) == (3.5, 1)
    assert candidate(4) == [[7]]
"""

LYING_VALUES = [
    ("object", "LiarObject()", NUMBER_TESTS),
    ("float-subclass", "LiarFloat(0.0)", NUMBER_TESTS),
    ("int-subclass", "LiarInt(0)", NUMBER_TESTS),
    ("object-as-string", "LiarObject()", STRING_TESTS),
    ("str-subclass", "LiarStr('')", STRING_TESTS),
    ("list-subclass", "LiarList()", LIST_TESTS),
    ("tuple-subclass", "LiarTuple()", LIST_TESTS),
    ("dict-subclass", "LiarDict()", DICT_TESTS),
    ("object-as-dict", "LiarObject()", DICT_TESTS),
    ("nested-object", "[LiarObject()] if x == 1 else {'a': LiarObject()} if x == 2 else (LiarFloat(0.0), LiarObject()) if x == 3 else [[LiarObject()]]", NESTED_TESTS),
    ("nested-subclasses", "LiarList([LiarInt(0)]) if x == 1 else LiarDict(a=LiarInt(0)) if x == 2 else LiarTuple((LiarFloat(0.0), LiarInt(0))) if x == 3 else [LiarList([LiarInt(0)])]", NESTED_TESTS),
    ("generator", "(i for i in range(3))", LIST_TESTS),
    ("function", "(lambda *a: True)", NUMBER_TESTS),
    ("type", "float", NUMBER_TESTS),
    ("not-implemented", "NotImplemented", NUMBER_TESTS),
    ("self-containing-list", "(lambda l: (l.append(l), l)[1])([])", LIST_TESTS),
]


def judged(program: str, tests: str, entry: str = "f", limits: Limits = FAST, context: str = ""):
    return run(Job(textwrap.dedent(program), tests, "humaneval", entry, limits, context))


def assert_no_pass(result):
    assert result.verdict is not Verdict.PASSED, result
    assert result.cases_passed == 0, result


@pytest.mark.parametrize("value, tests", [v[1:] for v in LYING_VALUES], ids=[v[0] for v in LYING_VALUES])
def test_lying_return_values_earn_nothing(value, tests):
    result = judged(LIARS + f"def f(x):\n    return {value}\n", tests)
    assert_no_pass(result)
    assert result.error_type in ("NotPlainData", "AssertionError", "IndexError", "KeyError", "TypeError"), result


def test_a_lying_value_that_is_a_plain_subclass_is_judged_by_its_real_value():
    # A float subclass holding the right value passes (its value is right); its lies do not travel.
    result = judged(LIARS + "def f(x):\n    return LiarFloat(3.5)\n", "def check(c):\n    assert c(1) == 3.5\n    assert c(2) - 1 == 2.5\n")
    assert result.passed, result
    objects = judged(LIARS + "def f(x):\n    return LiarObject()\n", "def check(c):\n    assert c(1) == 3.5\n")
    assert (objects.verdict, objects.error_type) == (Verdict.FAILED, "NotPlainData")


SHADOWS = """
import builtins
def abs(x): return 0
def len(x): return 3
builtins.abs = abs
builtins.len = len
builtins.round = lambda *a: 0.13
builtins.sorted = lambda *a, **k: [1, 2, 3]
builtins.isinstance = lambda *a: True
builtins.all = builtins.any = lambda *a: True
builtins.int = lambda *a: 42
class Never(BaseException): pass
builtins.AssertionError = Never
AssertionError = Never
def f(x):
    return 0
"""
SHADOW_TESTS = """
def check(candidate):
    assert abs(candidate(2) - 3.5) < 1e-6
    assert round(candidate(7), 2) == 0.13
    assert len(str(candidate(1))) == 3
    assert sorted([candidate(1)]) == [1, 2, 3]
    assert isinstance(candidate(1), str)
    assert all([candidate(1)])
    assert int(candidate(8)) == 42
"""


def test_shadowed_and_patched_builtins_do_not_reach_the_tests():
    assert_no_pass(judged(SHADOWS, SHADOW_TESTS))


MODULES = """
import sys, types, math, random, copy, importlib.abc, importlib.machinery
math.isclose = lambda *a, **k: True
math.fabs = lambda x: 0.0
random.Random = lambda *a: types.SimpleNamespace(random=lambda: 0.0)
copy.deepcopy = lambda x, memo=None: x
fake = types.ModuleType("math")
fake.isclose = lambda *a, **k: True
sys.modules["math"] = fake
open("math.py", "w").write("isclose = lambda *a, **k: True\\nfabs = lambda x: 0.0\\n")
open("random.py", "w").write("class Random:\\n    def __init__(self, *a): pass\\n    def random(self): return 0.0\\n")
sys.path.insert(0, ".")
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, None) if name in ("statistics", "heapq") else None
sys.meta_path.insert(0, Finder())
def f(x):
    return 0.0
"""
MODULE_TESTS = """
import math
def check(candidate):
    import random, copy, statistics
    assert math.isclose(candidate(1), 2.25)
    assert math.fabs(candidate(2) - 3.5) < 1e-4
    rng = random.Random(0)
    x = rng.random()
    assert candidate(x) == copy.deepcopy(x * 2)
    assert statistics.mean([candidate(3), candidate(4)]) == 10
"""


def test_shadowed_modules_the_tests_import_do_not_reach_them():
    assert_no_pass(judged(MODULES, MODULE_TESTS))


FRAMES = """
import sys

def poison():
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for key, value in list(scope.items()):
                if key in ("encode", "_encode", "decode", "_send", "_error_payload"):
                    scope[key] = (lambda *a, **k: b"T") if key != "_send" else scope[key]
                if isinstance(value, dict):
                    for k in ("n_cases", "mode", "names", "entry_point", "value_cap"):
                        if k in value:
                            value[k] = 0
                    value["__mrgrpo_cases__"] = lambda candidate: iter(())
                if isinstance(value, list):
                    value.clear()
        frame = frame.f_back

poison()

def f(x):
    poison()
    return -1
"""
EQUALITY_TESTS = """
def check(candidate):
    assert candidate(1) == 42
    assert candidate(2) == [1, 2]
    assert candidate(3) == "x"
"""


def test_frame_walking_and_rewriting_the_candidate_side_changes_nothing():
    assert_no_pass(judged(FRAMES, EQUALITY_TESTS))


FORGERY = """
import os
lines = b"iso netns\\nloaded\\ncase 0 ok\\ncase 1 ok\\ncase 2 ok\\ndone 3 0\\n"
def frame(kind, payload):
    return len(payload).to_bytes(4, "big") + kind + payload
forged = frame(b"O", b"i" + (42).to_bytes(8, "big")) * 8
for fd in range(0, 64):
    for data in (lines, forged):
        try:
            os.write(fd, data)
        except OSError:
            pass
def f(x):
    for fd in range(0, 64):
        try:
            os.write(fd, lines + forged)
        except OSError:
            pass
    return -1
"""
EXIT_AFTER_FORGERY = FORGERY + "os._exit(0)\n"


@pytest.mark.parametrize("program", [FORGERY, EXIT_AFTER_FORGERY], ids=["forged-replies", "forged-then-exit"])
def test_forged_verdict_lines_and_unsolicited_replies_earn_nothing(program):
    assert_no_pass(judged(program, EQUALITY_TESTS))


SECRET = 918273645
READ_SECRETS = f"""
import os, stat, sys, time
deadline = time.monotonic() + 15  # the file walk stops here: the program must end and report
marker = b"{SECRET}"
found = []

def scan(data, where):
    if marker in data:
        found.append(where)

def read_memory(pid):
    try:
        maps = open("/proc/%s/maps" % pid).read().splitlines()
        mem = open("/proc/%s/mem" % pid, "rb", 0)
    except Exception:
        return
    for line in maps:
        span, perms = line.split()[:2]
        if "r" not in perms:
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(start)
            scan(mem.read(min(end - start, 1 << 26)), "mem of %s" % pid)
        except Exception:
            pass

me = os.getpid()
for pid in ["self", os.getppid()] + list(range(max(2, me - 64), me + 64)):
    read_memory(pid)
try:  # the process's own memory through ctypes, region by region (no /proc/self/mem needed)
    import ctypes
    for line in open("/proc/self/maps").read().splitlines():
        span, perms = line.split()[:2]
        start, end = (int(x, 16) for x in span.split("-"))
        if perms.startswith("r") and "[vvar" not in line and end - start < (1 << 28):
            scan(ctypes.string_at(start, end - start), "own memory")
except Exception:
    pass
# Files: the likeliest places first (the working directory, the parent's, the temporary
# directories), then everything, within a budget of files and time so the scan always ends
# and reports (inside the 20 s CPU limit). Regular files only, opened non-blocking: some /proc
# files (kmsg) block a reader.
seen = 0

def walk(top):
    global seen
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("sys", "dev")]
        for name in files:
            seen += 1
            if seen > 20000 or time.monotonic() > deadline:
                return
            path = os.path.join(root, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        scan(os.read(fd, 1 << 20), path)
                finally:
                    os.close(fd)
            except Exception:
                pass

for top in (os.getcwd(), "/proc/%d/cwd" % os.getppid(), "/tmp", "/"):
    walk(top)
for fd in range(0, 256):
    try:
        os.set_blocking(fd, False)
        scan(os.read(fd, 1 << 20), "fd %d" % fd)
    except Exception:
        pass
scan(repr(os.environ).encode() + " ".join(sys.argv).encode(), "environment")
print("found:", found)

def f(x):
    return int(marker) if found else 0  # an attacker that found the expected answer returns it
"""


def test_the_expected_answers_are_nowhere_the_program_can_read():
    tests = f"def check(candidate):\n    assert candidate(3) == {SECRET}\n"
    result = judged(READ_SECRETS, tests, limits=Limits(wall_s=30, cpu_s=20, memory_mb=1024, output_bytes=1 << 16))
    assert_no_pass(result)
    assert "found: []" in result.stdout, result.stdout[-2000:]


EXITS_AT_IMPORT = [
    "import sys\nsys.exit(0)\n",
    "raise SystemExit(0)\n",
    "raise KeyboardInterrupt\n",
    "import os\nos._exit(0)\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "import ctypes\nctypes.CDLL(None).kill(ctypes.CDLL(None).getpid(), 9)\n",
    "import atexit, os, sys\natexit.register(lambda: os._exit(0))\nsys.exit(0)\n",
    "import os\nos.close(3)\nos.close(4)\n",
    "import os\nnull = os.open('/dev/null', os.O_RDWR)\nfor fd in (3, 4):\n    os.dup2(null, fd)\n",
    "import os\nos.abort()\n",
]
EXITS_AT_CALL = [  # (module-level line, the function's body)
    ("import sys", "sys.exit(0)"),
    ("", "raise SystemExit(0)"),
    ("", "raise KeyboardInterrupt"),
    ("", "raise GeneratorExit"),
    ("", "raise StopIteration"),
    ("import os", "os._exit(0)"),
    ("import os, signal", "os.kill(os.getpid(), signal.SIGKILL)"),
    ("import os", "os.close(4)"),
    ("import os", "os.write(4, (9).to_bytes(4, 'big') + b'Oi' + (41).to_bytes(8, 'big')); os._exit(0)"),
]


@pytest.mark.parametrize("trick", EXITS_AT_IMPORT, ids=range(len(EXITS_AT_IMPORT)))
def test_exit_tricks_at_import_time(trick):
    assert_no_pass(judged(trick + "def f(x):\n    return -1\n", EQUALITY_TESTS))


@pytest.mark.parametrize("head, body", EXITS_AT_CALL, ids=range(len(EXITS_AT_CALL)))
def test_exit_tricks_at_call_time(head, body):
    assert_no_pass(judged(f"{head}\ndef f(x):\n    {body}\n", EQUALITY_TESTS))


CLOCKS = """
import time
_spin = time.perf_counter
def f(x):
    start = _spin()
    while _spin() - start < 0.05:
        pass
    return x + 1
for name in ("perf_counter", "monotonic", "time", "process_time", "thread_time"):
    setattr(time, name, lambda: 0.0)
for name in ("perf_counter_ns", "monotonic_ns", "time_ns", "process_time_ns", "thread_time_ns"):
    setattr(time, name, lambda: 0)
"""


def test_patched_clocks_do_not_shorten_the_judged_time():
    result = judged(CLOCKS, "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n")
    assert result.passed, result
    assert result.test_time >= 2 * 0.05


def test_patched_clocks_earn_no_efficiency_against_a_fast_reference():
    suite = get_suite("code", components=("pass", "efficiency"), min_reference_s=0.0)
    test = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
    columns = {"test": [test], "entry_point": ["f"], "code_prefix": [""], "test_format": ["humaneval"],
               "reference": ["def f(x):\n    return x + 1\n"]}
    scores = {c.name: c(["p"], [textwrap.dedent(CLOCKS)], **columns) for c in suite.components}
    assert scores == {"pass": [1.0], "efficiency": [0.0]}


def test_redefined_context_helpers_do_not_reach_the_tests():
    """HumanEval/32-style: the tests call a helper from the prompt (``poly``); the program
    redefines it to always return 0 so that any root looks right."""
    context = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\ndef find_zero(xs):\n    \"\"\"A root.\"\"\"\n"
    program = context + "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 12345.0\n"
    tests = "def check(candidate):\n    assert abs(poly([1, 2], candidate([1, 2]))) < 1e-6\n"
    assert_no_pass(judged(program, tests, entry="find_zero", context=context))
    honest = context + "def find_zero(xs):\n    return -xs[0] / xs[1]\n"
    assert judged(honest, tests, entry="find_zero", context=context).passed


def test_huge_and_deep_replies_fail_that_case_and_the_caller_survives():
    huge = judged("def f(x):\n    return 'x' * (1 << 21)\n", EQUALITY_TESTS, limits=Limits(wall_s=8, cpu_s=4, reply_bytes=1 << 20))
    assert_no_pass(huge)
    assert huge.error_type == "ValueTooLarge"
    deep = judged("def f(x):\n    v = 0\n    for _ in range(10000):\n        v = [v]\n    return v\n", EQUALITY_TESTS)
    assert (deep.verdict, deep.error_type) == (Verdict.FAILED, "NotPlainData")


@pytest.fixture
def guards_only(monkeypatch):
    """A system that refuses every kernel layer (no namespaces, chroot, Landlock or seccomp), the user
    having opted in to guards-only runs: the verdict must still hold."""
    monkeypatch.setattr(sandbox, "_refused_layers", frozenset({"namespaces", "chroot", "landlock", "seccomp"}))
    monkeypatch.setenv(sandbox.ALLOW_UNISOLATED_ENV, "1")


# What guards-only runs report: as root the candidate still drops to the run's own uid.
GUARDS_ONLY = "uid,guards" if os.geteuid() == 0 else "guards"

@pytest.mark.parametrize(
    "program, tests",
    [(LIARS + "def f(x):\n    return LiarFloat(0.0)\n", NUMBER_TESTS), (SHADOWS, SHADOW_TESTS), (MODULES, MODULE_TESTS),
     (FRAMES, EQUALITY_TESTS), (FORGERY, EQUALITY_TESTS), (EXIT_AFTER_FORGERY, EQUALITY_TESTS)],
    ids=["lying-values", "builtins", "modules", "frames", "forgery", "forgery-exit"],
)
def test_without_isolation_the_verdict_still_holds(guards_only, program, tests):
    result = judged(program, tests)
    assert result.isolation == GUARDS_ONLY
    assert_no_pass(result)


def test_without_isolation_no_secret_is_readable(guards_only):
    tests = f"def check(candidate):\n    assert candidate(3) == {SECRET}\n"
    result = judged(READ_SECRETS, tests, limits=Limits(wall_s=30, cpu_s=20, memory_mb=1024))
    assert result.isolation == GUARDS_ONLY
    assert_no_pass(result)
    assert "found: []" in result.stdout, result.stdout[-2000:]


def test_the_caller_survives_and_nothing_is_left_behind():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "mrgrpo-sbx-*")))
    hostile = [LIARS + "def f(x):\n    return LiarObject()\n", SHADOWS, MODULES, FRAMES, FORGERY, EXIT_AFTER_FORGERY]
    hostile += [t + "def f(x):\n    return -1\n" for t in EXITS_AT_IMPORT]
    results = run_many([Job(p, EQUALITY_TESTS, "humaneval", "f", FAST) for p in hostile], workers=2)
    assert all(r.verdict is not Verdict.PASSED and r.cases_passed == 0 for r in results), results
    assert run(Job("def f(x):\n    return {1: 42, 2: [1, 2], 3: 'x'}[x]\n", EQUALITY_TESTS, "humaneval", "f", FAST)).passed
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "mrgrpo-sbx-*"))) <= before
    zygote = sandbox.processes._zygote_instance
    if zygote is not None:  # left: the launcher, its idle judge servers and its candidate
        # launcher (without root under that one's relay), nothing else
        judges = {pid for pid, _ in zygote.idle_judges}
        userns = set() if zygote.candidate_launcher_pid is None else {zygote.candidate_launcher_pid}
        assert sandbox.processes._live_pids() == {zygote.pid} | judges | userns
        children = {int(c) for c in open(f"/proc/{zygote.pid}/task/{zygote.pid}/children").read().split()}
        relays = children - judges
        assert judges <= children and len(relays) == len(userns)
        for relay, launcher in zip(relays, userns):
            if relay != launcher:  # as real root the candidate launcher has no relay
                assert open(f"/proc/{relay}/task/{relay}/children").read().split() == [str(launcher)]
            # no candidate left: at most the one spare candidate, confined and waiting for a run
            assert len(open(f"/proc/{launcher}/task/{launcher}/children").read().split()) <= 1


# --- efficiency: what it measures cannot be gamed ------------------------------------------

HEAVY_TESTS = "def check(candidate):\n" + "".join(f"    assert candidate({n}) == {sum(i * i for i in range(n))}\n" for n in (60000, 70000, 80000, 90000))
HONEST = "def f(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n    return total\n"
PRECOMPUTED = HONEST.replace("def f(n)", "def _slow(n)") + "_answers = {n: _slow(n) for n in (60000, 70000, 80000, 90000)}\ndef f(n):\n    return _answers[n]\n"
# A reference that does the work twice: the candidate's algorithm is exactly twice as fast.
TWICE_THE_WORK = HONEST.replace("    return total\n", "    check = 0\n    for i in range(n):\n        check += i * i\n    return total if check == total else -1\n")
BURN_AT_LOAD = "while True:\n    pass\n"
EFFICIENCY_ATTACKS = {"precompute-at-import": PRECOMPUTED, "burn-while-others-are-timed": BURN_AT_LOAD}


def efficiency_of(programs, reference=HONEST, **options):
    suite = get_suite("code", components=("pass", "efficiency"), timeout=6, workers=2, **options)
    n = len(programs)
    columns = {"test": [HEAVY_TESTS] * n, "entry_point": ["f"] * n, "code_prefix": [""] * n,
               "test_format": ["humaneval"] * n, "reference": [reference] * n}
    return {c.name: c(["p"] * n, programs, **columns) for c in suite.components}


def test_efficiency_pays_for_the_algorithm_not_for_tricks():
    """A copy of the reference earns ~0, precomputing at import earns ~0 (loading is timed), a
    program burning CPU while the batch runs cannot slow the reference (timed alone, after)."""
    scores = efficiency_of([HONEST, PRECOMPUTED, BURN_AT_LOAD, BURN_AT_LOAD])
    assert scores["pass"] == [1.0, 1.0, 0.0, 0.0]
    copy, precomputed, burner, _ = scores["efficiency"]
    # precomputing scored 0.64-0.82 before loading was timed (None: a window slowed throughout abstains)
    assert all(e is None or e <= 0.2 for e in (copy, precomputed)), scores
    assert burner == 0.0


def test_an_algorithm_twice_as_fast_earns_one_half():
    copies = [HONEST + f"\n# copy {i}\n" for i in range(3)]  # three programs, three timings
    scores = efficiency_of(copies, reference=TWICE_THE_WORK)
    assert scores["pass"] == [1.0] * 3
    # 1/2: the harness's own cost (the null program's time) is subtracted from both sides, windows the
    # machine slowed down get more rounds, and one slowed throughout abstains (None; docs/sandbox.md)
    scored = sorted(e for e in scores["efficiency"] if e is not None)
    assert scored and 0.3 <= scored[(len(scored) - 1) // 2] <= 0.7, scores
