"""Fixtures and markers for every test folder (CONTRIBUTING.md "Tests").

* Every check runs on a fixed seed and starts from a clean slate.
* ``slow``: a test that executes a notebook or starts a process (a subprocess, torchrun, a
  multiprocessing worker, a Jupyter kernel, the grader, bubblewrap).  Whole files and single tests are
  named in :data:`SLOW_FILES` / :data:`SLOW_TESTS` below, so the marker lives in one place.
  ``make test-fast`` deselects them (``-m "not slow"``); there, a test that starts a process without
  the marker fails with one line naming it, so the lists cannot silently fall behind.
"""
from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labsupport.check import _core

HERE = Path(__file__).resolve().parent

#: files (relative to tests/) whose every test executes a notebook or starts processes
SLOW_FILES = {
    "check/test_feedback_core.py",          # answer cells in a real kernel
    "datasets/test_preprocess_faults.py",   # python -m labsupport preprocess, killed on purpose
    "datasets/test_without_numba.py",       # a fresh interpreter with numba blocked
    "distributed/test_collectives.py",      # gloo process groups (run_workers)
    "grading/test_adversarial_class.py",    # the grader on a class, in bubblewrap
    "grading/test_exercises.py",            # every solution and exercise notebook, executed
    "grading/test_sandbox_limits.py",       # student processes in bubblewrap
    "grading/test_pool_faults.py",          # the grader with --jobs 2, a pool process killed
    "project/test_data.py",                 # scripts/build_data.py --check
    "project/test_gpu_report.py",           # python -m benchmarks.gpu_report
    "project/test_runall_faults.py",        # python -m labsupport runall, interrupted
    "project/test_startup_interrupt.py",    # commands interrupted while importing
    "project/test_versions.py",             # make and .ci/run
    "faults/test_injected_faults.py",       # issue #32's fault injector: train under signals, strace, flips
    "training/test_faults.py",              # python -m labsupport train, faults injected
    "training/test_launch.py",              # train --nproc-per-node: torchrun in-process
    "training/test_torchrun_restart.py",    # torchrun, a rank killed
    "training/test_trainer.py",             # fresh processes, torchrun
}
#: single tests (file::name, without parameters) that start processes, in files that are otherwise fast
SLOW_TESTS = {
    "check/test_feedback_training.py::test_the_grader_gives_the_solutions_full_marks_and_flags_the_reference",
    "crosscheck/test_indexed.py::test_cli_output_byte_identical_to_megatron_script",
    "crosscheck/test_hf_tokenizer.py::test_cli_output_byte_identical_to_megatron_script",
    "datasets/test_hf_tokenizer.py::test_the_cli_writes_each_document_as_encode_plus_eod",
    "datasets/test_hf_tokenizer.py::test_one_worker_and_two_write_the_same_bytes",
    "crosscheck/test_indexed.py::test_cli_two_keys_byte_identical_to_megatron_script",
    "datasets/test_preprocess.py::test_last_line_without_newline_and_long_lines",
    "datasets/test_preprocess.py::test_order_preserved_across_files_globs_workers_and_blocks",
    "datasets/test_preprocess.py::test_stale_temporaries_of_a_killed_run_are_removed",
    "datasets/test_preprocess.py::test_strict_stops_at_first_bad_line_and_leaves_nothing",
    "datasets/test_preprocess.py::test_tokenizer_without_exact_word_cache_is_encoded_as_before",
    "datasets/test_preprocess.py::test_word_cache_output_is_byte_identical_on_the_shipped_corpora",
    "datasets/test_preprocess.py::test_word_cache_with_several_json_keys",
    "datasets/test_preprocess.py::test_workbook_prefixes_two_processes_race",
    "datasets/test_preprocess_locks.py::test_the_lock_of_a_killed_run_is_taken_over",
    "datasets/test_spm_bpe_numba.py::test_preprocess_writes_the_same_bytes_with_either_engine",
    "datasets/test_spm_bpe_numba.py::test_spawned_workers_start_the_compiled_loop_themselves",
    "datasets/test_tokenizer.py::test_workbook_tokenizer_is_safe_when_processes_race",
    "grading/test_grader_pieces.py::test_honest_habits_are_not_punished",
    "grading/test_submissions.py::test_a_name_that_is_not_utf8_and_an_empty_notebook_are_rows_not_a_crash",
    "grading/test_submissions.py::test_one_gradebook_per_folder",
    "grading/test_submissions.py::test_ctrl_c_with_jobs_2_prints_one_line",
    "grading/test_submissions.py::test_a_second_grader_in_the_same_folder_is_refused_whatever_its_out",
    "grading/test_grader_pieces.py::test_regrade_and_interrupt",
    "grading/test_grader_pieces.py::test_sandbox_keeps_the_repository_and_other_students_read_only",
    "grading/test_grader_pieces.py::test_the_sandbox_drops_every_privilege",
    "grading/test_grader_pieces.py::test_the_students_copy_holds_no_check_code_and_no_reference",
    "grading/test_grader_pieces.py::test_the_students_process_has_no_network",
    "grading/test_grader_pieces.py::test_without_namespaces_the_grader_still_survives_its_parent_being_killed",
    "project/test_entry_point.py::test_python_dash_m_labsupport_lists_and_refuses",
    "project/test_entry_point.py::test_ctrl_c_while_importing_in_a_fresh_process",
    "project/test_hygiene.py::test_ruff_check_passes_outside_the_pending_paths",   # runs ruff
    "notebooks/test_pages_fit.py::test_in_chromium_the_new_table_fits_and_the_old_one_hides_columns",   # Chromium
    "notebooks/test_pages_fit.py::test_in_jupyterlab_itself_the_key_table_shows_every_column",   # jupyter lab
    "notebooks/test_workbook_helpers.py::test_mmap_loaders_share_one_page_cache_and_loaders_that_load_each_hold_a_copy",
    "training/test_schema.py::test_the_command_exits_2_with_one_line_naming_the_field",
    "training/test_dist_checkpoint.py::test_two_ranks_write_a_shard_each_holding_every_tensor_once",   # gloo
    "training/test_dist_checkpoint.py::test_a_killed_save_leaves_no_final_name_and_its_temporary_directory_is_removed",
    "training/test_dist_checkpoint.py::test_async_saves_under_two_ranks_equal_the_sync_ones",          # gloo
    "training/test_dist_checkpoint.py::test_a_two_rank_checkpoint_resumes_on_one_and_on_four_ranks",   # gloo
    "training/test_determinism.py::test_on_cuda_repeated_runs_are_bitwise_equal_with_the_switch",   # 4 trains
    "datasets/test_fast_start.py::test_the_json_is_megatrons_and_a_stale_one_is_refused",      # the command
    "datasets/test_fast_start.py::test_the_command_refuses_in_one_line",
    "grading/test_submissions.py::test_a_name_that_is_not_utf8_is_graded_once_and_two_such_names_are_one_student_reported",
    "training/test_locks.py::test_the_lock_of_a_killed_holder_is_taken_over",
    "training/test_locks.py::test_a_save_dir_locked_by_a_killed_trainer_is_taken_over",
    "training/test_locks.py::test_a_forked_child_does_not_keep_its_parents_lock",
    "training/test_rank_health.py::test_a_rank_stopped_inside_the_collective_on_this_machine_is_named_and_killed",
    "training/test_rank_health.py::test_a_store_that_is_gone_leaves_no_cpp_frames_on_stderr",
}


def _key(item: pytest.Item) -> tuple[str, str]:
    path = Path(str(item.path)).resolve()
    rel = path.relative_to(HERE).as_posix() if path.is_relative_to(HERE) else path.name
    return rel, f"{rel}::{getattr(item, 'originalname', item.name)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel, test = _key(item)
        if rel in SLOW_FILES or test in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


# --- make test-fast: a test not marked slow must not start a process ------------------------------
_RUNNING: list[pytest.Item] = []
#: one line per refused start (also when the code under test swallowed the RuntimeError)
_REFUSED: dict[str, str] = {}


def _refuse(what: str) -> None:
    if _RUNNING and _RUNNING[-1].get_closest_marker("slow") is None:
        _, test = _key(_RUNNING[-1])
        line = (f"error: {test} starts a process ({what}) but is not marked slow: "
                f"add it to SLOW_TESTS (or its file to SLOW_FILES) in tests/conftest.py")
        _REFUSED.setdefault(test, line)
        raise RuntimeError(line)


def _guarded(owner: object, name: str, what: str):
    original = getattr(owner, name)

    def guard(*args, **kwargs):
        _refuse(what)
        return original(*args, **kwargs)

    return original, guard


def _deselects_slow(config: pytest.Config) -> bool:
    expr = (config.option.markexpr or "").replace(" ", "")
    return "notslow" in expr


def pytest_configure(config: pytest.Config) -> None:
    if not _deselects_slow(config):
        return
    for owner, name, what in [(subprocess.Popen, "_execute_child", "subprocess"),
                              (multiprocessing.process.BaseProcess, "start", "multiprocessing"),
                              (os, "fork", "os.fork"), (os, "posix_spawn", "os.posix_spawn"),
                              (os, "posix_spawnp", "os.posix_spawnp"), (os, "system", "os.system")]:
        if hasattr(owner, name):
            _original, guard = _guarded(owner, name, what)
            setattr(owner, name, guard)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _RUNNING.append(item)
    try:
        yield
    finally:
        _RUNNING.pop()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for line in _REFUSED.values():
        terminalreporter.write_line(line, red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _REFUSED and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _checks_seeded_and_fresh(monkeypatch):
    """Seed the checks' random inputs (``$LABSUPPORT_CHECK_SEED``) so "a wrong answer fails" is
    deterministic, and forget results and attempts of earlier tests (``_core.reset``)."""
    monkeypatch.setenv(_core.SEED_ENV, "labsupport-tests")
    _core.reset()
    yield
    _core.reset()
