cwlVersion: v1.2
class: CommandLineTool
doc: >
  bwa mem: the reads mapped to the indexed reference, as SAM. Both are put in
  the working directory and named by their base names, so the command line
  bwa writes into the SAM header is the same wherever this runs.
requirements:
  InitialWorkDirRequirement:
    listing: [$(inputs.index), $(inputs.reads)]
inputs:
  index: Directory
  ref_name: string
  reads: File
baseCommand: [bwa, mem, -t, "1"]
arguments:
  - $(inputs.index.basename)/$(inputs.ref_name)
  - $(inputs.reads.basename)
stdout: aln.sam
outputs:
  sam: {type: stdout}
