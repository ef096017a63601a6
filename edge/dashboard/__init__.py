"""The live pool dashboard in the admin: its data (``data``, plain Python) and its views."""
