"""The skip guard of tests/conftest.py: a skip (or xfail) whose reason is not declared fails the
run, and every skip is listed at the end. Checked on a pytest run inside this one (pytester)."""

from __future__ import annotations

import pytest

from tests.conftest import DECLARED_SKIPS, NOT_ROOT, Skip, undeclared

CONFTEST = """
from tests.conftest import SkipGuard

def pytest_configure(config):
    config.pluginmanager.register(
        SkipGuard({"declared here": "a test of the guard"}), "guard-under-test"
    )
"""


def test_only_a_reason_not_in_the_declared_list_is_undeclared() -> None:
    skips = [Skip("a", "declared here"), Skip("b", "because"), Skip("c", "declared here ")]
    assert undeclared(skips, {"declared here"}) == [skips[1], skips[2]]
    assert undeclared(skips, {"declared here", "because", "declared here "}) == []


def test_the_declared_reasons_are_the_ipv6_loopback_and_the_release_image_as_non_root() -> None:
    assert set(DECLARED_SKIPS) == {"no IPv6 loopback (::1) here", NOT_ROOT}
    assert NOT_ROOT.startswith("not root:")


def run(pytester: pytest.Pytester) -> pytest.RunResult:
    """pytest on pytester's directory, with the guard of CONFTEST."""
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester.runpytest("-p", "no:cacheprovider")


def test_a_declared_skip_passes_the_run_and_is_listed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_runs():
            pass

        @pytest.mark.skipif(True, reason="declared here")
        def test_skipped():
            pass
        """
    )
    result = run(pytester)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["declared: *test_skipped: declared here"])


@pytest.mark.parametrize(
    "body",
    [
        '@pytest.mark.skipif(True, reason="not declared")\ndef test_skipped():\n    pass\n',
        'def test_skipped():\n    pytest.skip("not declared")\n',
        '@pytest.mark.xfail(reason="not declared")\ndef test_skipped():\n    assert False\n',
    ],
    ids=["skipif", "skip-call", "xfail"],
)
def test_an_undeclared_skip_fails_a_run_that_otherwise_passes(
    pytester: pytest.Pytester, body: str
) -> None:
    pytester.makepyfile("import pytest\n\ndef test_runs():\n    pass\n\n" + body)
    result = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["UNDECLARED: *test_skipped: *not declared", "1 skip(s) with an undeclared reason*"]
    )


def test_a_module_skipped_at_collection_is_caught_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_a="def test_runs():\n    pass\n",
        test_b='import pytest\n\npytest.skip("not declared", allow_module_level=True)\n',
    )
    result = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["UNDECLARED: test_b.py: not declared"])
