"""The TenantPolicy status controller: what the leader tells administrators about each policy."""
