"""The plugin contract: hook specifications, the plugin manager, the ports (what each kind of plugin may use of the server) and the base classes backends build on."""
