cwlVersion: v1.2
class: CommandLineTool
doc: "head -n N of a small text, to stdout."
baseCommand: head
inputs:
  n: {type: int, inputBinding: {prefix: -n, position: 1}}
  text: {type: File, inputBinding: {position: 2}}
stdout: head.txt
outputs:
  out: {type: stdout}
