"""The checksum repository agent: the worked example of a Despina repository agent."""
