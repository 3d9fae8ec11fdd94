"""The gate on tool calls: a sensitive call pauses (`calls`), its shop's policy says who must
approve it and when it escalates (`policies`, `escalation`), supervisors decide it
(`services`), and the call page tells them what they decide (`decision_context`). It knows
tools by name and arguments only: what a call is about and what looks wrong with it, a tool
says through its review (`reviews`)."""
