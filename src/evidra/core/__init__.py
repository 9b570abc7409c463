"""Records and errors, the registries and config, box geometry and conventions."""
