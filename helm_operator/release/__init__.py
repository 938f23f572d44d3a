"""Release state (pure decisions) and the Helm actions that move a release toward the desired one."""
