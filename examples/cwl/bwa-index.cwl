cwlVersion: v1.2
class: CommandLineTool
doc: "bwa index: the reference and its index, in one directory named index."
inputs:
  ref: File
baseCommand: [sh, -c, 'mkdir index && cp "$0" index/ && cd index && bwa index "$1"']
arguments: [$(inputs.ref.path), $(inputs.ref.basename)]
outputs:
  index: {type: Directory, outputBinding: {glob: index}}
