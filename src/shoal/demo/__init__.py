"""The demo model of `shoal up --demo` and the fake model servers it speaks through: a scripted
model behind each vendor's real wire protocol, so Shoal runs end to end with no keys."""
