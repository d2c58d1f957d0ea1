/**
 * How bash-parser.ts and its worker share one answer: a SharedArrayBuffer whose first two Int32s
 * are the status (0 while the worker parses) and the answer's length in bytes, then the answer:
 * the commands as JSON, or the error's message, or (tooLarge) nothing, the length being the room needed.
 */
export const PARSE_HEADER_BYTES = 8
export const PARSE_STATUS = { done: 1, failed: 2, tooLarge: 3 } as const
