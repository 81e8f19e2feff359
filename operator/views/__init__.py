"""What several controllers share, below all of them: the Slurm settings they read (the policy
holder), the poller's view of the bridge's Slurm jobs, and the node controller's table of Slurm's
nodes with its drains. A controller imports no other controller's rooms (tests/repo/test_import_graph.py);
what two of them read lives here, and views/ imports no controller."""
