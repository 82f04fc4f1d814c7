"""Notebook 08's checks: the continuous-batching engine, stage by stage, then whole.

  check            the six @check entries: admission, plan, reserve, fork, advance, the whole engine
  scenarios        the stage checks' case tables and hidden kinds (their stories), the whole engine's draws
  diagnosis        hints several rules share, and the functions that name a classic bug

the stages (a case class each: its sizes, ``draw(rng)`` and ``run``)
  hand_built       the states the stage checks build by hand on the learner's notebook 04 and 05 classes
  front_door       add_request alone: refuse only what can never fit, queue sample 0
  admission_cases  _admit on a queue behind a cached prompt, on an idle engine, at the spare 1%
  plan_cases       _plan on a running batch
  reserve_cases    _reserve on a pool: room, eviction, preemption
  fork_cases       _fork_samples on a prefilled request; _finish reporting samples by index
  advance          _advance on one hand-built step of chunks (``step_chunks``), its table
  after_advance    what _advance must have done, rule by rule

the rules and the watch (shared by the stage checks and the whole engine)
  engine_reads     what the rules read of the learner's engine, strictly
  rules            the rules of _admit and _plan, prefix entries kept, evictions
  reservation      the rules of _reserve and _preempt, watched as they happen
  watch            the engine under a watched subclass: each phase's hooks
  every_step       the rules of a whole step() and of every write of its forward pass

the whole engine (check_engine)
  whole            its parts: workloads and what each serves (``RUNNERS``)
  part_rejection   the rejection part
  served           serving a workload on the watched engine, against solo runs
  forward          _forward alone on plans the check makes (the batching part, first)
  judging          running the parts; a failure a stage's own check scores becomes a note
  blame            the stages each rule of the whole engine may come from
  attribution      whether a stage's own check already scores a failure of the whole engine
"""
