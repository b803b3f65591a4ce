"""The one way into pyinfra's run machinery, for the deploy (tasks/) and the operator's tools (ops/):
a run as one value (run.py) and the links to the hosts (connection.py). Nothing else in the product
touches pyinfra's state, callbacks or signals."""
