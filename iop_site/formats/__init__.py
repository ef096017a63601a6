"""Date and time formats of the admin, over Django's locale ones (FORMAT_MODULE_PATH)."""
