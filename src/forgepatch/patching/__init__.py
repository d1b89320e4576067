"""The patch engine: patches located by symbol and marker, applied as libcst codemods."""
