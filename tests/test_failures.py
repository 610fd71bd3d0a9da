"""dcode.failures: test and compiler output (recorded from real runs, gcc's made here) parsed into
failure locations, and pytest's summary counts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dcode.failures import Counts, Failure, Location, counts, innermost, parse

# pytest 8, `-q`, a test whose assertion calls the code under test
PYTEST_ASSERTION = """\
FF.                                                                      [100%]
=================================== FAILURES ===================================
___________________________________ test_add ___________________________________

    def test_add():
>       assert add(1, 2) == 3
E       assert 4 == 3
E        +  where 4 = add(1, 2)

test_calc.py:5: AssertionError
__________________________________ test_mean ___________________________________

    def test_mean():
>       assert mean([1, 2, 3]) == 2
E       assert 6.0 == 2
E        +  where 6.0 = mean([1, 2, 3])

test_calc.py:9: AssertionError
=========================== short test summary info ============================
FAILED test_calc.py::test_add - assert 4 == 3
FAILED test_calc.py::test_mean - assert 6.0 == 2
2 failed, 1 passed in 0.04s
"""

# pytest 8, an exception raised inside the code under test (two frames)
PYTEST_RAISED = """\
F                                                                        [100%]
=================================== FAILURES ===================================
__________________________________ test_mean ___________________________________

    def test_mean():
>       assert mean([1, 2]) == 1.5

test_calc.py:5: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ 

xs = [1, 2]

    def mean(xs):
>       return sum(xs) / (len(xs) - 2)
E       ZeroDivisionError: division by zero

calc.py:6: ZeroDivisionError
=========================== short test summary info ============================
FAILED test_calc.py::test_mean - ZeroDivisionError: division by zero
1 failed in 0.03s
"""

# pytest 8, a module under test that does not parse: a collection error
PYTEST_COLLECTION = """\

==================================== ERRORS ====================================
_________________________ ERROR collecting test_bad.py _________________________
/work/main/.venv/lib/python3.11/site-packages/_pytest/python.py:528: in importtestmodule
    mod = import_path(
<frozen importlib._bootstrap>:1204: in _gcd_import
    ???
test_bad.py:1: in <module>
    import bad
E     File "/tmp/fx/bad.py", line 1
E       def add(:
E               ^
E   SyntaxError: invalid syntax
=========================== short test summary info ============================
ERROR test_bad.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
1 error in 0.20s
"""

TRACEBACK = """\
Traceback (most recent call last):
  File "/tmp/fx/run.py", line 2, in <module>
    print(calc.mean([1,2]))
          ^^^^^^^^^^^^^^^^
  File "/tmp/fx/calc.py", line 6, in mean
    return sum(xs) / (len(xs) - 2)
           ~~~~~~~~^~~~~~~~~~~~~~~
ZeroDivisionError: division by zero
"""

# rustc 1.x on main.rs
RUSTC = """\
error[E0308]: mismatched types
 --> main.rs:6:21
  |
6 |     let s: String = add(1, 2);
  |            ------   ^^^^^^^^^ expected `String`, found `i32`
  |
error: aborting due to 1 previous error
"""

# tsc 5: the default form when piped, and --pretty's
TSC_PLAIN = "src/app.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.\n"
TSC_PRETTY = (
    "src/app.ts:3:7 - error TS2322: Type 'string' is not assignable to type 'number'.\n\n3   let n: number = 'x';\n"
)


def test_an_assertion_in_a_test_file_names_the_test_and_its_context() -> None:
    found = parse(PYTEST_ASSERTION)
    assert [f.test for f in found] == ["test_add", "test_mean"]
    assert found[0] == Failure(
        (Location("test_calc.py", 5),),
        "assert 4 == 3",
        "test_add",
        ">       assert add(1, 2) == 3\nE       assert 4 == 3\nE        +  where 4 = add(1, 2)",
    )
    assert counts(PYTEST_ASSERTION) == Counts(failed=2, passed=1)


def test_an_exception_in_the_code_under_test_is_its_innermost_frame() -> None:
    (failure,) = parse(PYTEST_RAISED)
    assert failure.frames == (Location("test_calc.py", 5), Location("calc.py", 6))
    assert failure.message == "ZeroDivisionError: division by zero"
    assert innermost(failure, lambda path: path == "calc.py") == Location("calc.py", 6)
    assert innermost(failure, lambda path: path == "other.py") is None
    assert counts(PYTEST_RAISED) == Counts(failed=1)


def test_a_collection_error_points_into_the_module_that_does_not_parse() -> None:
    (failure,) = parse(PYTEST_COLLECTION)
    assert failure.test == "test_bad.py"
    assert failure.message == "SyntaxError: invalid syntax"
    assert failure.frames[-1] == Location("/tmp/fx/bad.py", 1)
    assert counts(PYTEST_COLLECTION) == Counts(errors=1)


def test_a_python_traceback() -> None:
    (failure,) = parse(TRACEBACK)
    assert failure.frames == (Location("/tmp/fx/run.py", 2), Location("/tmp/fx/calc.py", 6))
    assert failure.message == "ZeroDivisionError: division by zero"
    assert "^" not in failure.context and "return sum(xs)" in failure.context
    assert counts(TRACEBACK) is None


@pytest.mark.parametrize(
    ("output", "location", "message"),
    [
        (RUSTC, Location("main.rs", 6, 21), "error[E0308]: mismatched types"),
        (TSC_PLAIN, Location("src/app.ts", 3, 7), "error TS2322: Type 'string' is not assignable to type 'number'."),
        (TSC_PRETTY, Location("src/app.ts", 3, 7), "error TS2322: Type 'string' is not assignable to type 'number'."),
        ("./main.go:5:2: undefined: x\n", Location("./main.go", 5, 2), "undefined: x"),
        (
            "r.py:2:5: F821 Undefined name `undefined_name`\n",
            Location("r.py", 2, 5),
            "F821 Undefined name `undefined_name`",
        ),
        (
            'm.py:2: error: Incompatible return value type (got "int", expected "str")  [return-value]\n',
            Location("m.py", 2),
            'error: Incompatible return value type (got "int", expected "str")  [return-value]',
        ),
    ],
)
def test_compiler_and_linter_lines(output: str, location: Location, message: str) -> None:
    (failure,) = parse(output)
    assert (failure.frames, failure.message) == ((location,), message)


def test_notes_and_warnings_give_way_to_errors() -> None:
    output = "a.c:1:5: warning: unused variable 'x'\na.c:3:1: note: declared here\na.c:4:9: error: expected ';'\n"
    assert [f.frames[0].line for f in parse(output)] == [4]
    assert [f.frames[0].line for f in parse("a.c:1:5: warning: unused variable 'x'\n")] == [1]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_real_gcc_output(tmp_path: Path) -> None:
    (tmp_path / "calc.c").write_text("int add(int a, int b) {\n    return a + b\n}\n")
    done = subprocess.run(["gcc", "-c", "calc.c", "-o", "calc.o"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0
    (failure,) = parse(done.stderr)
    assert failure.frames[0].path == "calc.c" and failure.frames[0].line in (2, 3)
    assert failure.message.startswith("error: expected")
    assert "return a + b" in failure.context


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1 failed, 2 passed in 0.05s", Counts(1, 2, 0)),
        ("==== 3 passed, 1 warning in 1.20s ====", Counts(0, 3, 0)),
        ("2 failed, 5 passed, 1 error in 0.31s", Counts(2, 5, 1)),
        ("1 passed, 2 errors in 0.31s", Counts(0, 1, 2)),
        ("no tests ran in 0.01s", Counts()),
        ("collected 3 items", None),
    ],
)
def test_summary_counts(line: str, expected: Counts | None) -> None:
    assert counts(f"...\n{line}\n") == expected


def test_counts_read_as_pytest_says_them() -> None:
    assert str(Counts(2, 5)) == "2 failed, 5 passed"
    assert str(Counts(0, 1, 1)) == "1 passed, 1 error"
    assert str(Counts()) == "no tests ran"
