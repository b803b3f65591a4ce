"""The order of a class's turns (rolling.turns), a replica's way out of its gateway and back around its restart (rolling.through_gateway), and the drains recorded on the gateway host (drains)."""
