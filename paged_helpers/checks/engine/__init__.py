"""Notebook 08's checks: the continuous-batching engine, stage by stage, then whole.

    stages       admission, the step's plan, reserving room (evicting, preempting), n-way forks
    advance      one hand-built step of seven kinds of chunk: what the engine does after the model
    whole        the learner's engine serving seeded workloads, against solo runs of each request
    forward      _forward alone on plans the check makes (whole's batching part, first)
    rules        what every engine check reads of the learner's engine and expects of it
    watch        the engine under a watched subclass: each step's writes, frees and refusals
    blame        the stages each rule of the whole engine may come from
    attribution  whether a stage's own check already scores a failure of the whole engine
"""
