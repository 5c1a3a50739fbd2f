"""Train one objective until its accounted FLOPs reach the budget. Nine modules, read in this order: runs (a run or an
untrained control from start to result.json: train_run, control_run), loop (`fit`, `train_step`, the checkpoints'
cool-down branches and evaluations), evaluation (the held-out loss and metrics, ELECTRA's Bayes reference), live_metrics
(loss, throughput and MFU as a run goes), state (what a run is asked to be, Work and Context; build, restore and save
it), batches (rows, seeds, prefetch, held-out batches), config (RunConfig, the optimizer, the learning rate by FLOPs,
the evaluation grid, --seq-len schedules), distributed (Fabric, launchers, the one all-reduce, the shared folder, stop
signals) and records (what a run has spent, its curve, result.json typed).

Everything that makes runs comparable lives here:
- every objective and seed reads the same windows in the same order (step s reads windows s·B .. s·B + B − 1);
- a sequence-length schedule (config.SeqLenSchedule) switches the window length when the FLOPs spent cross a
  phase's end: step s (the run's step, which also seeds its masks) then reads windows s·B .. s·B + B − 1 of that
  phase's windowing (the corpus's windows cut to its length), and each phase's steps, tokens, supervised positions
  and FLOPs are counted apart; held-out evaluation is at the last phase's length;
- the learning rate is a function of the FLOPs spent (warmup-stable-decay), so warm-up and cool-down end exactly at
  the budget for every objective, whatever its cost per step;
- evaluations happen at one log-spaced grid of FLOP checkpoints, on held-out windows corrupted identically for every
  run of an objective, so curves line up across seeds and objectives; each point before the budget is a finished run,
  a branch cooled down to that checkpoint (loop.TrainingLoop.cool_down_branches);
- each evaluation is appended to the run folder as it finishes, and the state (model, optimizer, counters; the data
  position is the step) is checkpointed with it, so an interrupted run resumes exactly. There is no RNG state to
  carry: each row of a step's batch is corrupted from its own generator, seeded from (seed, step, row)
  (bench.common.seeds, objectives.draws), so a process corrupts only its own rows and they are the rows of the whole
  batch, on any number of devices; and the global RNG (ELECTRA's sampling, dropout) is reseeded from (seed, step, rank)
  before every step, so each process draws its own noise and a resumed run draws the same noise as an uninterrupted one;
- how a step is executed does not change what it computes: micro-batches (--micro-batch) accumulate to the gradient of
  the whole batch, activation checkpointing recomputes the same values, and the FLOPs counted are the model's.

Long runs: the state is also saved every `checkpoint_every` minutes, and SIGTERM or SIGUSR1 (a scheduler's warning
before it ends a job) saves it at the end of the current step and exits with EXIT_STOPPED; rerunning resumes exactly.
An evaluation or the final yardsticks under way when the signal comes stop at their next batch or fit
(bench.common.stopping.check_stop) and are dropped: the state is saved without them, and the resumed run does them
again. A training step reads one number from the device, the global loss (with the stop and save requests of every
process beside it): that single synchronisation lets every process stop at the same step on a NaN or a signal. The next
step's rows are corrupted in a background thread while this one runs (`Prefetcher`), into pinned memory on CUDA, and
copied without blocking; the counts that step needs from the other processes' rows (supervised positions, FLOPs) ride in
this step's all-reduce, so a step makes one collective, on the training backend alone (no second, host-side group whose
address resolution can fail on a cluster where NCCL works).
"""
