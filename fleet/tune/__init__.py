"""make tune: the candidates, their measurement's reading, the winner, the class file's change."""
