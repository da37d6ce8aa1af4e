"""Bundled device profiles (JSON): published GPU datasheet values, and profiles measured on the
development hosts (``calib --rounds 3``): ``pocl-local`` on the Zen 3 KVM host with PoCL 3.0's
wheel, ``pocl31-zen5`` on the Zen 5 KVM host with Debian's PoCL 3.1. Load them with
:func:`calib.profile.load_profile` by file stem (``load_profile("a100")``);
:func:`calib.profile.bundled_profile_for` finds the one measured on a given device and driver."""
