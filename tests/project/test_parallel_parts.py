"""`make test`'s parts (tests/parallelrun.py): which worker, and so which container, runs a test."""

from tests.parallelrun import part_of


def test_a_release_e2e_tests_are_split_in_two_containers_and_the_cluster_has_its_own():
    assert part_of("tests/e2e/test_jobs.py::test_a_job_runs[d12]") == "e2e-d12"
    assert part_of("tests/e2e/test_periodic.py::test_cycle[d13]") == "e2e-d13-b"
    assert part_of("tests/e2e/test_told.py::test_resume[d12]") == "e2e-d12-b"
    assert part_of("tests/e2e/test_cluster.py::test_fire[d12]") == "e2e-d12-cluster"


def test_tests_of_no_release_and_rootfs_only_tests_run_with_the_unit_tier():
    assert part_of("tests/runner/test_gates.py::test_x") == "unit"
    assert part_of("tests/e2e/test_setup_fresh.py::test_demo[d12]") == "unit"
    assert part_of("tests/e2e/test_periodic_held.py::test_p[d12]") == "e2e-d12-b"
