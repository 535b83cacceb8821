"""The live dashboard and playground (``--enable-dashboard``): ``routes`` wires them into the app."""
