cwlVersion: v1.2
class: Workflow
doc: "Read mapping: index the reference, map the reads, sort and index the alignments."
requirements:
  StepInputExpressionRequirement: {}
inputs:
  ref: File
  reads: File
outputs:
  bam: {type: File, outputSource: index_bam/indexed}
  index: {type: Directory, outputSource: index_ref/index}
steps:
  index_ref:
    run: bwa-index.cwl
    in: {ref: ref}
    out: [index]
  map:
    run: bwa-mem.cwl
    in:
      index: index_ref/index
      ref_name: {source: ref, valueFrom: $(self.basename)}
      reads: reads
    out: [sam]
  sort:
    run: samtools-sort.cwl
    in: {sam: map/sam}
    out: [bam]
  index_bam:
    run: samtools-index.cwl
    in: {bam: sort/bam}
    out: [indexed]
