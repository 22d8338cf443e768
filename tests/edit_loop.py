"""Tests kept out of ``make test-fast`` (the edit loop) though they train for only a few
seconds: marked ``slow`` by conftest, so ``make test`` still runs every one of them.

Chosen by measurement, not by guess: each costs 2.5 CPU-seconds or more, or 6 s of wall time
or more (a Ray pool's start), in ``make test-cpu`` on the two-core machine; together they were
about a third of the edit loop's time (5m10s). Not listed: a test of a module whose tests
share one run (conftest ``shares_module_work``), where the shared run moves to the next test
rather than leaving the loop. ``tests/test_edit_loop.py`` checks that every id here still
names a collected test, so a renamed test cannot drop out of this list unnoticed."""

from __future__ import annotations

SLOW_IN_THE_EDIT_LOOP = frozenset({
    "tests/test_algorithm_contract.py::test_algorithm_contract[pfedme]",
    "tests/test_algorithm_contract.py::test_algorithm_contract[spcacw]",
    "tests/test_async_rounds.py::test_buffer_of_everyone_at_equal_speed_is_sync_fedavg",
    "tests/test_async_rounds.py::test_fedper_and_fedprox_run_asynchronously",
    "tests/test_bad_input.py::test_generated_config_files_validate_or_fail_in_one_line",
    "tests/test_bad_input.py::test_generated_overrides_validate_or_fail_in_one_line",
    "tests/test_checkpoint.py::test_report_redraws_the_row_norm_figure_from_the_final_checkpoint",
    "tests/test_checkpoint.py::test_resumed_run_equals_the_uninterrupted_one",
    "tests/test_composition.py::test_async_run_stopped_by_ctrl_c_resumes_to_the_bit",
    "tests/test_composition.py::test_cell_works[deployed-held-out clients]",
    "tests/test_composition.py::test_cell_works[exchange-checkpoint]",
    "tests/test_composition.py::test_cell_works[exchange-local]",
    "tests/test_composition.py::test_cell_works[sync-held-out clients]",
    "tests/test_debian_reference.py::test_prepare_the_installed_packages",
    "tests/test_faults_64_schedules.py::test_a_run_with_an_integer_schedule_trains_with_each_rounds_count",
    "tests/test_fedvg.py::test_scaffold_with_fedvg_and_a_public_val_set_on_ray_equals_local",
    "tests/test_flops.py::test_extra_passes_are_counted_as_the_right_multiples",
    "tests/test_hardening.py::test_a_flipped_byte_is_caught_and_resume_falls_back[tensor]",
    "tests/test_hf_cache.py::test_a_change_of_columns_or_data_makes_a_new_entry",
    "tests/test_hf_data.py::test_shakespeare_schema_is_char_windows_for_the_char_lstm",
    "tests/test_hf_data.py::test_the_ray_pool_equals_the_local_executor_on_hf_data[femnist]",
    "tests/test_hf_data.py::test_the_ray_pool_equals_the_local_executor_on_hf_data[shakespeare]",
    "tests/test_holdout.py::test_after_training_evaluates_the_model_a_client_keeps",
    "tests/test_holdout.py::test_global_model_of_fedavg_is_its_personal_model",
    "tests/test_holdout.py::test_newcomers_change_nothing_the_federation_keeps",
    "tests/test_holdout.py::test_resumed_run_with_held_out_clients_equals_the_uninterrupted_run",
    "tests/test_own_module_contract.py::test_plain_module_equals_the_built_in_model[pfedme]",
    "tests/test_promises.py::test_a_resumed_run_logs_each_round_to_wandb_once",
    "tests/test_promises.py::test_a_run_name_that_exists_goes_to_name_2_never_over_it",
    "tests/test_run_folder_safety.py::test_existing_run_is_refused_and_overwrite_replaces_it",
    "tests/test_scheduled_values.py::test_a_constant_schedule_is_the_number_to_the_bit",
    "tests/test_scheduled_values.py::test_a_worker_with_its_own_copy_of_the_algorithm_gets_the_rounds_values",
    "tests/test_scheduled_values.py::test_scheduled_values_show_in_the_metrics_and_resume_exactly"
    "[algorithm.mu={schedule: adaptive, initial: 0.5, step: 0.2}]",
    "tests/test_scheduled_values.py::test_scheduled_values_show_in_the_metrics_and_resume_exactly[schedule0]",
    "tests/test_simulation.py::test_non_finite_client_left_out_and_reported",
    "tests/test_spcacw.py::test_targets_side_by_side_equal_each_run_alone",
    "tests/test_startup.py::test_a_ray_run_writes_its_startup_timeline",
    "tests/test_system_rounds.py::test_report_compares_runs_on_one_time_axis",
})  # fmt: skip


def base_id(nodeid: str) -> str:
    """A test's id without the ``@group`` suffix xdist's loadgroup adds."""
    return nodeid.split("@", 1)[0]
