"""High availability (`edge.ha`): one leader among the Edges of one id, by a PostgreSQL lock.

``role`` is the leader/standby state machine, ``elector`` the loop that holds or seeks the lock,
``pg_lock`` the lock itself on its own psycopg connection; none of them imports Django.
``cluster`` is the Django side: the database check, the takeover (the cluster's config from the
database) and the fence (what a leader that lost its lock stops at once).
"""
