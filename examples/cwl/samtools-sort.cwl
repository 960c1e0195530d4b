cwlVersion: v1.2
class: CommandLineTool
doc: "samtools sort: the alignments sorted by position, as BAM (no @PG of its own)."
inputs:
  sam: File
stdin: $(inputs.sam.path)
baseCommand: [samtools, sort, --no-PG, -o, sorted.bam, "-"]
outputs:
  bam: {type: File, outputBinding: {glob: sorted.bam}}
