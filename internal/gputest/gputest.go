// Package gputest runs tests on ggml's Vulkan backend, built by
// scripts/build-vulkan.sh, over Mesa's software GPU (lavapipe, on
// llvmpipe), so that GPU code paths are tested on machines without a GPU.
// scripts/test.sh builds the backend and names its folder in
// SWARM_VULKAN_LIB; without it the GPU tests skip (a plain go test).
package gputest

import (
	"os"
	"testing"

	"github.com/llmswarm/llmswarm/internal/engine"
)

// LibEnv names the folder of the built Vulkan backend (…/lib/ollama).
const LibEnv = "SWARM_VULKAN_LIB"

// VisibleEnv is ggml-vulkan's list of devices to use: it skips CPU-type
// devices (llvmpipe) unless they are named.
const VisibleEnv = "GGML_VK_VISIBLE_DEVICES"

// Setup loads the Vulkan backend for this test binary where LibEnv names
// it, with the first device visible whatever its type. Call it from
// TestMain, before any model loads.
func Setup() error {
	lib := os.Getenv(LibEnv)
	if lib == "" {
		return nil
	}
	if os.Getenv(VisibleEnv) == "" {
		os.Setenv(VisibleEnv, "0")
	}
	_, err := engine.InitBackends(lib)
	return err
}

// Device is the GPU a test runs on. It skips where LibEnv is unset and
// fails where the backend it names gave no device.
func Device(t testing.TB) engine.Device {
	t.Helper()
	if os.Getenv(LibEnv) == "" {
		t.Skip(LibEnv + " unset: make test builds the Vulkan backend (scripts/build-vulkan.sh) and names it there")
	}
	devs := engine.Devices()
	if len(devs) == 0 {
		b, _ := engine.InitBackends("")
		t.Fatalf("%s=%s gave no GPU: %v", LibEnv, os.Getenv(LibEnv), b.Warnings)
	}
	return devs[0]
}

// Lib is the backend folder for a daemon a test starts (config
// engine.gpu_libs), skipping as Device does.
func Lib(t testing.TB) string {
	t.Helper()
	lib := os.Getenv(LibEnv)
	if lib == "" {
		t.Skip(LibEnv + " unset: make test builds the Vulkan backend (scripts/build-vulkan.sh) and names it there")
	}
	return lib
}
