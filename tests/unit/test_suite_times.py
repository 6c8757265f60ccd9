""".ci/suite_times.py: each suite's test time from pytest's JUnit XML, per CI pass (BENCHMARKS.md)."""
from __future__ import annotations

import importlib.util

from tests.support import REPO_ROOT

spec = importlib.util.spec_from_file_location("suite_times", REPO_ROOT / ".ci" / "suite_times.py")
suite_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_times)

JUNIT = """<testsuites><testsuite name="pytest" tests="3" time="50.5">
<testcase classname="tests.image.test_ssh" name="a" time="10.0"/>
<testcase classname="tests.image.test_jupyter.TestX" name="b" time="5.5"/>
<testcase classname="tests.runtimes.test_apptainer" name="c" time="20"/>
</testsuite></testsuites>"""


def test_a_suite_is_the_folder_under_tests_and_its_time_the_sum_of_its_tests(tmp_path):
    path = tmp_path / "cpu.xml"
    path.write_text(JUNIT)
    assert suite_times.suite_times([str(path)]) == {"cpu tests/image": (2, 15.5), "cpu tests/runtimes": (1, 20.0)}
    assert suite_times.pass_wall_times([str(path)]) == {"cpu": 50.5}
