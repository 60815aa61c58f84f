// Package trainer owns the offline CLEAR pipeline over the replay buffer.
// Reflection (camproxy train reflect): Sample groups the episodes by task and draws
// the subsets of runs to compare; each Job gets a Sandbox of readable files and a
// tool-using agent driven by an OpenAI-compatible or Bedrock Converse Model; Reflect
// runs the jobs concurrently, with retries and resume, and appends guidance to a
// JSON Lines file. Training inputs: WriteSFT and WriteDPO write LLaMA-Factory data,
// configs and launch files, WriteGRPO veRL Parquet, reward.py and launch scripts, all
// with the serving CAM's prompt (a Prompter) and one split by task (SplitByTask);
// Pairs draws preference pairs from the buffer; Launch runs what was written.
package trainer
