"""The gate on tool calls: a sensitive call pauses (`calls`), its shop's policy says who must
approve it and when it escalates (`policies`, `escalation`), supervisors decide it
(`services`), and the call page and inbox tell them what they decide (`decision_context`,
`inbox`). It knows tools by name and arguments only: what a tool means for a shop is the
tool's own business."""
