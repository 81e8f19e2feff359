"""Which PlaceholderJob a pod belongs to (pure rules, the reads they need), and the machinery of
joining one."""
