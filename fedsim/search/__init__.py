"""Hyperparameter search over fedsim experiments (``fedsim tune``), on Ray Tune.

    fedsim tune configs/quickstart.yaml rounds=20 algorithm.name=fedprox \\
        --search client.lr='loguniform(0.001,0.1)' --search algorithm.mu='choice(0,0.01,0.1)' \\
        --samples 16 --scheduler asha --metric acc_weighted --mode max --out runs/tune-prox

Options can also live in the config file, in a ``tune:`` section next to the experiment
(``configs/tune/*.yaml``); command-line values win. Results: ``<out>/trials.csv``,
``<out>/best.yaml`` (ready to run: ``fedsim run <out>/best.yaml``) and a table.

Spaces: ``loguniform(a,b)``, ``uniform(a,b)``, ``randint(a,b)`` (a <= v < b),
``choice(v1,v2,...)`` (sampled) and ``grid(v1,v2,...)`` (every value, ``--samples`` times).
Each trial is a full simulation reporting after every evaluated round, with the run's
checkpoint of that round, so ASHA can stop bad trials early. ``--scheduler pbt`` (Population
Based Training): every ``--perturbation-interval`` evaluations a trial in the bottom quarter
continues a top trial's checkpoint with the searched values mutated (only client.*,
algorithm.* and join_ratio can be searched: they may change mid-run). ``--search-alg
optuna``: Optuna's TPE proposes the values (``pip install 'fedsim-pfl[optuna]'``). Every trial
leaves a complete run folder (summary.json, plots/); one stopped early says ``status:
stopped``. ``fedsim tune --resume OUT`` continues an interrupted search: finished trials
stay, the others continue from their last reported checkpoint. A trial runs its clients
in-process (local executor, one bundle of ``runtime.cpus_per_worker`` CPUs); with
``--trial-executor ray`` (``auto`` picks it when ``runtime.gpus_per_worker > 0``) it drives
a pool of ``runtime.workers`` Ray workers (a number is required) inside its placement group,
so ``gpus_per_worker=0.25`` puts four workers on one GPU.

- ``space.py``: the space language (``loguniform(a,b)``, ``choice(...)``, ...), checked
  against the config before Ray starts;
- ``options.py``: ``TuneOptions``, each option spelled once (tune: key, CLI flag, keyword);
- ``resources.py``: one placement group per run (shared with ``ray_jobs.reproduce``);
- ``trial.py``: one trial = one ``run_experiment`` reporting every evaluation (and its
  checkpoint) to Tune, continued from a Tune checkpoint when Tune restores it;
- ``results.py``: trials.csv, best.yaml, the terminal table;
- ``sweep.py``: the orchestration (``run_tune``, ``resume_tune``; schedulers, Optuna);
- ``stats.py``: mean ± std over seeds (sample std), for every results table.

Only ``sweep.py``, ``trial.py`` and ``Space.to_tune`` import Ray, inside functions.
"""
