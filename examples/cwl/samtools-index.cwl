cwlVersion: v1.2
class: CommandLineTool
doc: "samtools index: the BAM with its .bai beside it."
requirements:
  InitialWorkDirRequirement:
    listing: [$(inputs.bam)]
inputs:
  bam: File
baseCommand: [samtools, index]
arguments: [$(inputs.bam.basename)]
outputs:
  indexed:
    type: File
    secondaryFiles: [.bai]
    outputBinding: {glob: $(inputs.bam.basename)}
