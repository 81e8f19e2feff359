"""The PlaceholderJob controller's side of Slurm: how a job names its PlaceholderJob, the poller and
its view of the bridge's jobs, where a job is placed (allocate or queue), and orphaned jobs."""
