"""The shell that applies the lifecycle's plans: the PlaceholderJob's writes, its member pods'
release and end, DRA claims, the PodGroups' scheduled conditions."""
