package config

// This file reads the secret files the config names (hash.salt_file,
// hold.cookie.secret_file, hold.share.password_file): bounded in size, and
// with messages that never quote their content.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// MinSaltBytes is the shortest salt hash.salt_file may hold: 128 bits.
const MinSaltBytes = 16

// readSalt reads a salt file: its bytes, surrounding spaces, tabs and
// line ends removed (so a trailing newline, or none, gives one salt on
// every replica), at least MinSaltBytes of them. On failure it returns a
// message that never quotes the salt.
func readSalt(path string) ([]byte, string) {
	data, msg := readSmall(path, "want one salt of at least "+strconv.Itoa(MinSaltBytes)+" bytes")
	if msg != "" {
		return nil, msg
	}
	salt := bytes.Trim(data, " \t\r\n")
	if len(salt) < MinSaltBytes {
		return nil, fmt.Sprintf("holds a salt of %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64 > FILE)", len(salt), MinSaltBytes)
	}
	return bytes.Clone(salt), ""
}

// Limits of the hold cookie's secret file.
const (
	MinSecretBytes    = 32       // shortest secret accepted: HMAC-SHA256's output size
	maxSecretFileSize = 64 << 10 // a secret file is a few lines; refuse anything larger
)

// readSecrets reads a secret file: one secret per line, surrounding spaces,
// tabs and a CR removed, blank lines ignored; at least one secret and each
// at least MinSecretBytes long. On failure it returns a message that never
// quotes a secret.
func readSecrets(path string) ([][]byte, string) {
	data, msg := readSmall(path, "want one secret per line")
	if msg != "" {
		return nil, msg
	}
	var secrets [][]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		s := bytes.Trim(line, " \t\r")
		if len(s) == 0 {
			continue
		}
		if len(s) < MinSecretBytes {
			return nil, fmt.Sprintf("line %d: secret is %d bytes, want at least %d", i+1, len(s), MinSecretBytes)
		}
		secrets = append(secrets, bytes.Clone(s))
	}
	if len(secrets) == 0 {
		return nil, fmt.Sprintf("holds no secret; want one per line, each at least %d bytes", MinSecretBytes)
	}
	return secrets, ""
}

// readPassword reads a password file: its first line, surrounding spaces,
// tabs and a CR removed; it must not be empty. On failure it returns a
// message that never quotes the file's content.
func readPassword(path string) (string, string) {
	data, msg := readSmall(path, "want the password on one line")
	if msg != "" {
		return "", msg
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	pw := strings.Trim(string(line), " \t\r")
	if pw == "" {
		return "", "holds no password on its first line"
	}
	return pw, ""
}

// readSmall reads a file of secrets, refusing one larger than
// maxSecretFileSize (then the message ends in want). On failure it returns
// a message that never quotes the content.
func readSmall(path, want string) ([]byte, string) {
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var data []byte
		if data, err = io.ReadAll(io.LimitReader(f, maxSecretFileSize+1)); err == nil {
			if len(data) > maxSecretFileSize {
				return nil, fmt.Sprintf("larger than %d KiB; %s", maxSecretFileSize>>10, want)
			}
			return data, ""
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return nil, "cannot read: " + err.Error()
}
