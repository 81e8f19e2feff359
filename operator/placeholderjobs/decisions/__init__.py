"""The pieces every job shape's decisions are made of (pure): the inputs of a decision, the plan
of actions and the outcomes reported back, member pods' predicates, the statuses written at the
turning points, a job in Slurm's queue, a job's allocation."""
