"""English formats: times with their zone, in an order that sorts (2026-05-01 14:03:27 UTC).

Only what differs from Django's `en` formats is here; the rest falls back to them.
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
