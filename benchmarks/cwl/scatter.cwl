cwlVersion: v1.2
class: Workflow
doc: "A scatter of one small tool: the first N lines of a small text, once per N."
requirements:
  ScatterFeatureRequirement: {}
inputs:
  text: File
  counts: int[]
outputs:
  heads: {type: "File[]", outputSource: head/out}
steps:
  head:
    run: head.cwl
    scatter: n
    in: {text: text, n: counts}
    out: [out]
