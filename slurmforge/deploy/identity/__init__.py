"""Where users come from: SSSD's settings and the embedded directory's seed."""
