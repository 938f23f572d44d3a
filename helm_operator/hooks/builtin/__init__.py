"""Ready-made day-2 building blocks (Job-based backups with retention) for hook modules."""
