"""What frontends share about connections: stopping a listener without resetting the
connections clients made (``listen``), and cancelling a request whose client went away
(``disconnect``). The protocol engines live in their frontends (h1_engine, h2_engine)."""
