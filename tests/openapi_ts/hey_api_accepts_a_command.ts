// Compiled with `tsc --strict` beside the @hey-api/openapi-ts client: its SubmitTask takes
// a command of any length (a tuple type would refuse this file).
import type { SubmitTask } from "./gen/hey-api/types.gen.js";

export const threeWords: SubmitTask = { command: ["sh", "-c", "echo hi"] };
export const oneWord: SubmitTask = { command: ["true"] };
