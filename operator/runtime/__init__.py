"""The ground floor the controllers share, importing none of them: watch stores and the work
queue, the Slurm poll loop, leader election, kopf's login, the C heap."""
