"""Backups: the archive (written atomically, verified whole), what a backup copies and how it stays
consistent, and taking one on either target."""
