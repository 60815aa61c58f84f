// Package trainer owns the offline CLEAR pipeline over the replay buffer. So far it
// holds contrastive reflection (camproxy train reflect, issue 6): Sample groups the
// episodes by task and draws the subsets of runs to compare; each Job gets a Sandbox of
// readable files and a tool-using agent (list_files, read_file, grep, confined to the
// sandbox) driven by an OpenAI-compatible or Bedrock Converse Model; Reflect runs the
// jobs concurrently, with retries and resume, and appends each job's guidance to a
// JSON Lines file. SFT data, LLaMA-Factory and veRL runs come with issue 7.
package trainer
