"""Bundled device profiles (JSON): published GPU datasheet values, and the profile measured on
the development machine. Load them with :func:`calib.profile.load_profile` by file stem
(``load_profile("a100")``)."""
