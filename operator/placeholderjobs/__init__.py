"""The PlaceholderJob controller: pods -> PlaceholderJobs -> Slurm jobs, and back."""
