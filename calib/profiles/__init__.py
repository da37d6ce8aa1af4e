"""Bundled device profiles (JSON): published GPU datasheet values, and profiles measured on the
2-core x86-64 virtual machines (``calib --rounds 3``): ``pocl-local`` on a 2-core x86-64 virtual machine with PoCL 3.0's
wheel, ``pocl31-zen5`` on another with Debian's PoCL 3.1. Load them with
:func:`calib.profile.load_profile` by file stem (``load_profile("a100")``);
:func:`calib.profile.bundled_profile_for` finds the one measured on a given device and driver."""
