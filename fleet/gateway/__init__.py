"""SGLang's model gateway (smg: its spec, commands and what it answers) and a gateway group behind a floating address (keepalived, the handoff, the group's turns)."""
