"""What runs in a ``process``-mode model's own process (numpy only, never the server):
the stub that loads ``model.py`` and answers the server's messages."""
