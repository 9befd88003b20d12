// Checks the gateway's checkpoints and proofs with Go's golang.org/x/mod/sumdb/note and
// sumdb/tlog: an implementation of signed notes and RFC 6962/9162 Merkle proofs that this project
// did not write (test/modules/record/transparency-log.test.ts runs it; Debian's golang-go and
// golang-golang-x-mod-dev provide the compiler and the packages, built in GOPATH mode).
//
// Reads one JSON document on stdin and writes one JSON document of results on stdout.
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	VerifierKeys []string `json:"verifier_keys"`
	Checkpoints  []string `json:"checkpoints"`
	Inclusions   []struct {
		RecordHash string   `json:"record_hash"`
		LeafIndex  int64    `json:"leaf_index"`
		TreeSize   int64    `json:"tree_size"`
		RootHash   string   `json:"root_hash"`
		Hashes     []string `json:"hashes"`
	} `json:"inclusions"`
	Consistencies []struct {
		From     int64    `json:"from"`
		To       int64    `json:"to"`
		FromRoot string   `json:"from_root"`
		ToRoot   string   `json:"to_root"`
		Hashes   []string `json:"hashes"`
	} `json:"consistencies"`
}

type checkpointResult struct {
	Error  string `json:"error,omitempty"`
	Origin string `json:"origin,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Root   string `json:"root,omitempty"`
	Signer string `json:"signer,omitempty"`
}

type output struct {
	Checkpoints   []checkpointResult `json:"checkpoints"`
	Inclusions    []string           `json:"inclusions"`
	Consistencies []string           `json:"consistencies"`
}

func hashes(list []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(list))
	for i, s := range list {
		h, err := tlog.ParseHash(s)
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// errorText is "" for success, as the results list it.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func openCheckpoint(verifiers note.Verifiers, text string) checkpointResult {
	n, err := note.Open([]byte(text), verifiers)
	if err != nil {
		return checkpointResult{Error: err.Error()}
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return checkpointResult{Error: "checkpoint text has fewer than three lines"}
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return checkpointResult{Error: "tree size: " + err.Error()}
	}
	if _, err := tlog.ParseHash(lines[2]); err != nil {
		return checkpointResult{Error: "root hash: " + err.Error()}
	}
	return checkpointResult{Origin: lines[0], Size: size, Root: lines[2], Signer: n.Sigs[0].Name}
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "input:", err)
		os.Exit(2)
	}
	var list []note.Verifier
	for _, key := range in.VerifierKeys {
		v, err := note.NewVerifier(key)
		if err != nil {
			fmt.Fprintln(os.Stderr, "verifier key:", err)
			os.Exit(2)
		}
		list = append(list, v)
	}
	verifiers := note.VerifierList(list...)
	out := output{Checkpoints: []checkpointResult{}, Inclusions: []string{}, Consistencies: []string{}}
	for _, text := range in.Checkpoints {
		out.Checkpoints = append(out.Checkpoints, openCheckpoint(verifiers, text))
	}
	for _, p := range in.Inclusions {
		out.Inclusions = append(out.Inclusions, errorText(func() error {
			data, err := hex.DecodeString(strings.TrimPrefix(p.RecordHash, "sha256:"))
			if err != nil {
				return err
			}
			root, err := tlog.ParseHash(p.RootHash)
			if err != nil {
				return err
			}
			proof, err := hashes(p.Hashes)
			if err != nil {
				return err
			}
			return tlog.CheckRecord(proof, p.TreeSize, root, p.LeafIndex, tlog.RecordHash(data))
		}()))
	}
	for _, p := range in.Consistencies {
		out.Consistencies = append(out.Consistencies, errorText(func() error {
			from, err := tlog.ParseHash(p.FromRoot)
			if err != nil {
				return err
			}
			to, err := tlog.ParseHash(p.ToRoot)
			if err != nil {
				return err
			}
			proof, err := hashes(p.Hashes)
			if err != nil {
				return err
			}
			return tlog.CheckTree(proof, p.To, to, p.From, from)
		}()))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
}
